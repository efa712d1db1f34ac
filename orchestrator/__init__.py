"""kvsweep's package. The report's analysis and the shipped sweeps are its subpackages ``orchestrator.analysis`` and
``orchestrator.sweeps``: a wheel installs them there (``setup.py``), so that it takes no generic top-level name, and a
checkout keeps them at its top as ``analysis/`` and ``sweeps/`` (users run ``python sweeps/NAME.py``), where this
package's path takes in the checkout's root so that the same names import them."""

from orchestrator.paths import CHECKOUT_SUBPACKAGES, PROJECT_ROOT

if all((PROJECT_ROOT / name / "__init__.py").is_file() for name in CHECKOUT_SUBPACKAGES):
    __path__.append(str(PROJECT_ROOT))
