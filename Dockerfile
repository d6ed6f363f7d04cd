# One Glassbox server: docker build -t glassbox . && docker run -p 8501:8501 glassbox
# For a class too big for one process, run several of these behind a balancer with sticky
# sessions: deploy/CLUSTER.md.
# Both build arguments have working defaults; deploy/docker_check.sh overrides them on a machine
# that cannot pull the base image or reach PyTorch's index (a local base, a wheel in wheels/).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG TORCH_INSTALL="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"

WORKDIR /app
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 MALLOC_ARENA_MAX=2 \
    MALLOC_MMAP_THRESHOLD_=1048576

# torch's CPU build from PyTorch's own index first: from PyPI, Linux gets the CUDA build with
# gigabytes of libraries. For a GPU image, use an NVIDIA CUDA base image and the cu128 index (README).
# `wheels*` matches nothing in a plain checkout: the legacy builder accepts that beside a file that exists
# (checked both ways); BuildKit, not available where this was checked, is documented to accept it too.
COPY requirements.txt wheels* /tmp/build/
RUN pip install ${TORCH_INSTALL} && pip install -r /tmp/build/requirements.txt && rm -rf /tmp/build

COPY app.py serve.py ./
COPY .streamlit .streamlit
COPY core core
COPY ui ui
COPY pages pages
COPY assets assets

RUN useradd --create-home glassbox
USER glassbox
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"
CMD ["streamlit", "run", "serve.py", "--server.address=0.0.0.0", "--server.port=8501", \
     "--server.headless=true", "--server.fileWatcherType=none"]
