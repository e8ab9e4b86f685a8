import sys
from pathlib import Path

# The tests' shared models live beside them; importlib mode does not put this folder on the path.
sys.path.insert(0, str(Path(__file__).parent))
