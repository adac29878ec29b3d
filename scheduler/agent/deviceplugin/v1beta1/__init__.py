"""The kubelet device plugin API v1beta1: api.proto and its generated modules."""
