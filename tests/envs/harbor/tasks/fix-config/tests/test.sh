#!/bin/bash
python3 /tests/check_config.py /app/config.json > /logs/verifier/reward.json
