"""L1 the model as data: graph view, ModelGraph scopes, load/save, random feeds. Imports only fusion.errors."""
