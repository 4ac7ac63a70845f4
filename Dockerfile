# The Threadline worker (and CLI) image used by docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY core core
COPY store store
COPY activities activities
COPY workflows workflows
COPY threadline threadline
COPY worker.py ./
# With the telemetry extra: traces go to the compose collector when OTEL_EXPORTER_OTLP_ENDPOINT is set.
RUN pip install --no-cache-dir ".[telemetry]" && useradd --create-home threadline && mkdir /data && chown threadline /data
USER threadline
ENV THREADLINE_DATA=/data
CMD ["python", "worker.py"]
