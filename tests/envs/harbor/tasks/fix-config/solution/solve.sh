#!/bin/bash
cat > /app/config.json <<'JSON'
{"name": "svc", "port": 8080, "debug": false}
JSON
