#!/bin/bash
# The verifier: 1 when /app/answer.txt holds the right count, else 0.
mkdir -p /logs/verifier
expected=$(grep -c a /app/data/words.txt)
if [ -f /app/answer.txt ] && [ "$(tr -d '[:space:]' < /app/answer.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
