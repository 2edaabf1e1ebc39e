"""Process runtime shared by every layer: the serve event loop (eventloop), random ids (ids), Prometheus
metrics (metrics)."""
