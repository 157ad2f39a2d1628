"""Pictures of schedules for `aref compare`: the steady state as a Gantt chart (`aref.viz.gantt`) and the
loop's dependence graph coloured by warp group (`aref.viz.graph`). matplotlib is imported only when a
picture is drawn (the Agg backend: no display needed)."""


def save(fig, path: str, dpi: int = 110) -> None:
    """Write a matplotlib figure; a PNG is stored with a 64-colour palette (a third of the size, the same look:
    the pictures are flat colours and text)."""
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    if str(path).lower().endswith(".png"):
        from PIL import Image
        with Image.open(path) as img:
            small = img.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
        small.save(path, optimize=True)
