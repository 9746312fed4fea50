"""mainstem's own small clients for protocols that have no full client on PyPI."""
