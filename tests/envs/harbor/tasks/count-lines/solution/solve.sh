#!/bin/bash
grep -c a /app/data/words.txt > /app/answer.txt
