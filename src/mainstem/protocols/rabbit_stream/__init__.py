"""RabbitMQ Stream protocol: sans-IO codec (`codec`, `frames`, `wire`, `constants`)."""
