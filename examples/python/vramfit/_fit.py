"""assert_fits: the Python launcher's static_assert(vramfit::check_fits<Plan, Gpu>())."""

from ._results import FIT_REPORT


class DoesNotFit(AssertionError):
    """A configuration that does not fit its GPU. An AssertionError, as the compile-time check
    is a static_assert; the message carries the compile error's fit_report numbers, and
    `result` the whole estimate."""

    def __init__(self, result):
        self.result = result
        super().__init__(_message(result))


def _message(result):
    where = f"{result.get('configuration', result.command)} on {result['device']['name']}"
    report = getattr(result, "report", None)
    if report is None:  # a plan where no layout fits, a KV pool too small for the batch
        return f"vramfit: does not fit: {where}"
    figures = report()
    fields = ", ".join(f"{name}={figures[name]}" for name in FIT_REPORT if name in figures)
    extra = ", ".join(f"{name}={value}" for name, value in figures.items()
                      if name not in FIT_REPORT)
    over = figures["required"] - figures["available"]
    return (f"vramfit: the plan does not fit the GPU. fit_report{{{fields}}}"
            f"{' with ' + extra if extra else ''} in bytes: {over} over. {where}")


def assert_fits(result=None, /, **options):
    """Raises DoesNotFit unless `result` (from train, infer, load, min_gpus or plan), or
    train(**options), fits; returns the result."""
    if result is None:
        from ._commands import train  # the commands raise DoesNotFit: imported when used
        result = train(**options)
    elif options:
        raise TypeError("assert_fits() takes a result or train()'s keywords, not both")
    try:
        fits = result.fits
    except AttributeError:  # explain=, sweep= (no single verdict), or not a result at all
        raise TypeError(f"assert_fits() takes an answer that fits or not (from train, infer, "
                        f"load, min_gpus or plan, without explain= or sweep=), got "
                        f"{type(result).__name__}") from None
    if not fits:
        raise DoesNotFit(result)
    return result
