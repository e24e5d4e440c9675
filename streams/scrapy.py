"""The Scrapy add-on is :mod:`miqps.scrapy`; ``streams.scrapy.Addon`` (0.2.0) still works."""

from miqps.scrapy import Addon, CanonicalRequestsMiddleware, MapsRequestFingerprinter

__all__ = ["Addon", "CanonicalRequestsMiddleware", "MapsRequestFingerprinter"]
