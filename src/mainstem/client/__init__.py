"""mainstem's own small clients for protocols that have no client on PyPI."""
