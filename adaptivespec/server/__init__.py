"""The daemon: OpenAI-compatible API, admin API, metrics and systemd integration on aiohttp."""
