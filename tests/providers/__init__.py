"""Model providers over real HTTP on loopback, and the offline model."""
