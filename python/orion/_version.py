"""The one place the version lives: pyproject.toml reads it from here (scikit-build-core regex provider);
``orion.__version__`` re-exports it."""

__version__ = "0.1.0"
