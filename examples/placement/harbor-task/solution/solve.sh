#!/bin/bash
echo "hello world" > /tmp/workspace/notes.txt
