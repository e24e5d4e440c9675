"""The simulated web: seeded synthetic websites served by a loopback HTTP proxy.

``sites`` builds the sites and their ground truth, ``corpus`` generates URL streams with
content keys, ``server`` serves the pages and ``python -m simweb`` drives both.
"""
