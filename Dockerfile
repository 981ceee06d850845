# The converge server (every ROLE) as a static binary on distroless.
# Build for the Fargate architecture the infra stack uses:
#   docker build --platform linux/arm64 --build-arg VERSION=$(git describe --tags --always) -t converge .
# The web console (ui/), built once on the build platform: the server embeds
# ui/site/dist, and a binary built without it serves only a page saying how
# to build the console.
FROM --platform=$BUILDPLATFORM node:20-bookworm-slim AS ui
WORKDIR /ui
COPY ui/package.json ui/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY ui/ ./
RUN npm run build

FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
COPY --from=ui /ui/site/dist ./ui/site/dist
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/convergeplane/converge/internal/version.Version=${VERSION}" \
      -o /out/converge ./cmd/converge

# The RDS CA bundle, so DATABASE_URL can use sslmode=verify-full: the Mozilla
# roots in the runtime image do not include the RDS certificate authorities.
FROM scratch AS rds-ca
ADD https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem /rds-global-bundle.pem

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/converge /converge
COPY --from=rds-ca /rds-global-bundle.pem /etc/ssl/certs/rds-global-bundle.pem
USER nonroot:nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/converge"]
