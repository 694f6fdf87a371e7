#!/bin/bash
# The grader asks the inventory service itself, not a copy of its data.
python /tests/check.py
