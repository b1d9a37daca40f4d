#!/usr/bin/env bash
# Starts an S3-compatible server (moto, from PyPI) on loopback for the storage tests.
# Source it: `source scripts/s3.sh`; it exports ATOLL_TEST_S3_URL and the AWS variables,
# and ATOLL_S3_PID (stop it with `kill $ATOLL_S3_PID`).
set -euo pipefail
_s3_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_s3_venv="${ATOLL_S3_VENV:-$HOME/.cache/atoll/s3-venv}"
if [ ! -x "$_s3_venv/bin/moto_server" ] || ! cmp -s "$_s3_root/tests/s3/requirements.txt" "$_s3_venv/requirements.txt"; then
  echo "==> installing the S3 test server (moto) into $_s3_venv"
  python3 -m venv "$_s3_venv"
  "$_s3_venv/bin/pip" install --quiet --disable-pip-version-check -r "$_s3_root/tests/s3/requirements.txt"
  cp "$_s3_root/tests/s3/requirements.txt" "$_s3_venv/requirements.txt"
fi
_s3_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$_s3_venv/bin/moto_server" -H 127.0.0.1 -p "$_s3_port" > "${TMPDIR:-/tmp}/atoll-s3-$_s3_port.log" 2>&1 &
export ATOLL_S3_PID=$!
for _ in $(seq 1 100); do
  if curl -s -o /dev/null "http://127.0.0.1:$_s3_port/"; then break; fi
  sleep 0.1
done
curl -sf -X PUT "http://127.0.0.1:$_s3_port/atoll-test" -o /dev/null
export AWS_ENDPOINT_URL="http://127.0.0.1:$_s3_port"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export ATOLL_TEST_S3_URL="s3://atoll-test"
echo "==> S3 test server on $AWS_ENDPOINT_URL (bucket atoll-test)"
