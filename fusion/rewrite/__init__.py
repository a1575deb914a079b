"""L3 plugin specs, reference function bodies, Emitter/Editor and the Rule API. Imports fusion.match and below."""
