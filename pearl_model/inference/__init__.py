"""Encoding phrases: backbones, the PEARL network and model, the ONNX/OpenVINO engines, exports, static and baseline encoders, ``load_encoder``."""
