"""Sphinx configuration of Berth's documentation (``tox -e docs``)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, ROOT)

project = "Berth"
copyright = "Berth developers"
author = "Berth developers"
release = "0.1.0"

extensions = [
    "oslo_config.sphinxext",
    "oslo_policy.sphinxext",
    "berth_cli",
]

# oslo.config's and oslo.policy's directives name generator files relative to
# the repository root.
config_generator_config_file = None
policy_generator_config_file = None

root_doc = "index"
exclude_patterns = ["_build"]
pygments_style = "sphinx"
html_theme = "alabaster"
html_title = "Berth documentation"
html_static_path: list[str] = []
html_theme_options = {"description": "A standalone, fast and correct VM scheduler",
                      "fixed_sidebar": True}
# Every page shows where it is in the tree.
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html",
                        "searchbox.html"]}
nitpicky = False
