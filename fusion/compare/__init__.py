"""L7 proving a fused model equivalent (onnxruntime, or TensorRT via fusion.trt). Imports fusion.trt and below."""
