#!/usr/bin/env bash
# Build and start the GAIA gateway in Docker, wait until /health answers, print the MCP config.
#   env/gaia/run-local.sh            (Docker)
#   aworld-train env up gaia         (the same gateway as a plain process, no Docker)
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -f .env ]; then
  cp .env_template .env
  echo "created env/gaia/.env from .env_template; add keys there (search needs GOOGLE_API_KEY, GOOGLE_CSE_ID)"
fi
set -a
# shellcheck disable=SC1091
. ./.env
set +a
port="${GAIA_MCP_PORT:-8080}"

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
