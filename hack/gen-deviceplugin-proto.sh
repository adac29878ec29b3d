#!/usr/bin/env bash
# Regenerate the Python modules of the kubelet device plugin API (v1beta1) from api.proto.
# Needs grpcio-tools (pip install grpcio-tools); the generated files are committed, so the
# package itself needs only grpcio and protobuf at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=scheduler/agent/deviceplugin/v1beta1
python -m grpc_tools.protoc -I "$dir" --python_out="$dir" --pyi_out="$dir" \
  --grpc_python_out="$dir" "$dir/api.proto"
# protoc writes `import api_pb2`; make it a package-relative import.
sed -i 's/^import api_pb2 as api__pb2$/from . import api_pb2 as api__pb2/' "$dir/api_pb2_grpc.py"
# The module refuses to import under a grpcio older than the version it names; name the oldest
# grpcio pyproject.toml allows, so every install it permits works, whichever grpcio-tools ran.
floor=$(sed -n 's/^ *"grpcio>=\([0-9.]*\),.*/\1/p' pyproject.toml | head -n 1)
if [ -z "$floor" ]; then
  echo "pyproject.toml: no \"grpcio>=X,...\" dependency to take the generated version from" >&2
  exit 1
fi
sed -i "s/^GRPC_GENERATED_VERSION = '.*'$/GRPC_GENERATED_VERSION = '$floor'/" "$dir/api_pb2_grpc.py"
