"""Reading and writing: the JSON graph format, ONNX and PyTorch import, and plan export (:mod:`pase.io.export`)."""

__all__ = ["EXPORT_FORMATS", "NotExpressibleError", "export_plan"]


def __getattr__(name: str):
    # Late: the exporter imports the training model, which a reader of graph files need not load.
    if name in __all__:
        from pase.io import export

        return {"EXPORT_FORMATS": export.FORMATS, "NotExpressibleError": export.NotExpressibleError,
                "export_plan": export.export_plan}[name]
    raise AttributeError(f"module 'pase.io' has no attribute {name!r}")
