"""adaptivespec: a serving daemon that learns when speculative decoding pays off."""

__version__ = "0.1.0"
