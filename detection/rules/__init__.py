"""The built-in detection rules, one module per rule, each defining ``RULE`` (``detection/rule.py``).

``detection/registry.py`` imports every module of this package (and of the packages named in
``SPARKTAP_RULE_PACKAGES``): adding a rule is adding one file here.
"""
