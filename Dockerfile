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
RUN pip install --no-cache-dir . && useradd --create-home threadline && mkdir /data && chown threadline /data
USER threadline
ENV THREADLINE_DATA=/data
CMD ["python", "worker.py"]
