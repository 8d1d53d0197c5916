"""Service benchmarks: a real uvicorn process under load, incident grouping and the incident worker."""
