"""Encoding phrases: backbones, the PEARL network and model, ONNX/OpenVINO engines, exports, static encoders."""
