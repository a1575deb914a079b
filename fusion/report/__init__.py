"""L8 HTML and SVG renderings of fusion results. Imports fusion.compare, fusion.passes and below."""
