"""Fuse decomposed LayerNorm/RMSNorm and fully-connected ONNX subgraphs into TensorRT plugin nodes."""
