"""L6 TensorRT: profiles, build, inspect, run, timing (tensorrt imported lazily). Imports fusion.ir and below."""
