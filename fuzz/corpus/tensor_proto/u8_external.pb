Bextj
locationweights.binj
offset0j
length4p