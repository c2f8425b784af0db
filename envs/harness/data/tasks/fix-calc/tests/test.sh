#!/bin/bash
# The task's own check: run from the agent's work dir; the reward goes to Harbor's file.
mkdir -p /logs/verifier
cd /app
if python3 -c 'from calc import add; assert add(2, 3) == 5 and add(-4, 1) == -3'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
