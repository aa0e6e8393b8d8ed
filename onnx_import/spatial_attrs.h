// Internal to onnx_import: Conv, ConvTranspose and pooling attributes in the
// IR's explicit form. ONNX lets models leave kernel_shape (taken from W),
// strides, dilations and pads out, and describe padding by auto_pad or, for
// ConvTranspose, by output_shape; all of these are resolved to full-length
// lists here.
#pragma once

#include "graph/attrs.h"
#include "onnx_import/node_importer.h"

namespace tessera::onnx_import {

Attrs resolve_spatial_attrs(NodeImporter& n, OpKind kind);

}  // namespace tessera::onnx_import
