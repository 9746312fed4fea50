"""Apache Iggy binary protocol: sans-IO codec and asyncio connection."""
