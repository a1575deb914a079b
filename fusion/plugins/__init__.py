"""L6 building and checking the plugin_src/ library. Imports fusion.rewrite.specs and fusion.errors only."""
