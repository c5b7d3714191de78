#!/usr/bin/env bash
# Build and start the GAIA gateway in Docker, wait until /health answers, print the MCP config.
#   env/gaia/run-local.sh            (Docker)
#   aworld-train env up gaia         (the same gateway as a plain process, no Docker)
set -euo pipefail
cd "$(dirname "$0")"

if ! docker compose version >/dev/null 2>&1; then
  echo "needs Docker with Compose v2 (docker compose): https://docs.docker.com/compose/install/" >&2
  exit 1
fi
if [ ! -f .env ]; then
  cp .env_template .env
  echo "created env/gaia/.env from .env_template; add keys there (search needs GOOGLE_API_KEY, GOOGLE_CSE_ID)"
fi
# .env fills what the caller's environment leaves unset (the caller wins, as with docker compose)
given="$(export -p)"
set -a
# shellcheck disable=SC1091
. ./.env
set +a
eval "$given"
port="${GAIA_MCP_PORT:-8080}"

# a CA bundle for pip and the gateway behind a TLS-intercepting proxy (see ca/README.md)
rm -f ca/ca-bundle.crt
if [ -n "${GAIA_CA_BUNDLE:-}" ]; then
  cp "$GAIA_CA_BUNDLE" ca/ca-bundle.crt
fi

docker compose -f docker-compose.yaml up -d --build

echo "waiting for http://127.0.0.1:${port}/health ..."
for _ in $(seq 1 "${GAIA_STARTUP_WAIT_S:-180}"); do
  if health="$(curl -fsS "http://127.0.0.1:${port}/health" 2>/dev/null)"; then
    echo "Start mcp server success: ${health}"
    auth=""
    if [ -n "${GAIA_GATEWAY_TOKEN:-}" ]; then
      auth=', "Authorization": "Bearer ${GAIA_GATEWAY_TOKEN}"'
    fi
    cat <<JSON

export MCP_SERVER_URL=http://127.0.0.1:${port}/mcp

{"mcpServers": {"aworld-mcp": {"type": "streamable-http", "url": "http://127.0.0.1:${port}/mcp",
  "headers": {"MCP_SERVERS": "documents,python,calculator,search"${auth}},
  "timeout": 600, "sse_read_timeout": 600, "client_session_timeout_seconds": 600}}}
JSON
    exit 0
  fi
  sleep 1
done
echo "the gateway did not answer on port ${port}; last logs:" >&2
docker compose -f docker-compose.yaml logs --tail 50 >&2
exit 1
