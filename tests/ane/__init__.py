# A package, so that this folder's conftest.py is imported as "ane.conftest" and never shadows the
# suite's root conftest module (tests/runtime imports helpers from it by the name "conftest").
