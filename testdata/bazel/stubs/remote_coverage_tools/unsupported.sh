#!/bin/sh
echo "coverage is not supported in this offline test workspace" >&2
exit 1
