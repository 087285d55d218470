"""Package list for setuptools (the rest of the metadata is in pyproject.toml).

`nodes/` is shipped as `inferix_nodes` so that installing the pack never creates a top-level
`nodes` module, which would collide with ComfyUI's own `nodes.py`.
"""

from setuptools import find_packages, setup

core = find_packages(include=["inferix_core", "inferix_core.*"])
node_subpackages = ["inferix_nodes." + p for p in find_packages(where="nodes")]
setup(
    packages=[*core, "inferix_nodes", *node_subpackages],
    package_dir={"inferix_nodes": "nodes"},
)
