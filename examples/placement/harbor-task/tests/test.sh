#!/bin/bash
read -r text < /tmp/workspace/notes.txt
echo "notes.txt: $text"
if [ "$text" = "hello world" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
