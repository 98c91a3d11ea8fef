# syntax=docker/dockerfile:1
# pgmirror container image: a static binary on a distroless, non-root base.
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t pgmirror .
# The image needs SERVICE_DATABASE_URL and SERVICE_ENCRYPTION_KEY (it has no
# PostgreSQL server for the embedded default); see deploy/README.md.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/pgmirror ./cmd/pgmirror

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="pgmirror" \
      org.opencontainers.image.description="PostgreSQL-to-PostgreSQL change data capture with a REST API" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/pgmirror /usr/local/bin/pgmirror
USER nonroot:nonroot
ENV SERVICE_PORT=8112
EXPOSE 8112
HEALTHCHECK --interval=15s --timeout=6s --start-period=30s --retries=3 CMD ["/usr/local/bin/pgmirror", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/pgmirror"]
CMD ["serve"]
