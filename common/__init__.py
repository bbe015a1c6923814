"""Library shared by the jobs: config, sessions, lakehouse, tracking, readers, validation, taxonomy."""
