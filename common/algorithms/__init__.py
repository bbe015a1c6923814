"""Graph algorithms as DataFrame transforms used by several domains: connected components and triangle
counts (GraphFrames where its jar is present)."""
