"""statissa: queue and store statistics computed with PySpark, served to Prometheus."""
