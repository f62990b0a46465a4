"""Test support that must never ship: the fake cluster (:mod:`.fakecluster`), the
``mlenv`` entry point that runs the real CLI against it (:mod:`.fake_mlenv`) and the
stateful fake ``kubectl`` the client contract suite drives (:mod:`.kubectl_cli`).

pyproject excludes ``mlenv.testing*`` from the wheel and no product layer may import it
(tests/unit/test_layers.py): production code has no path to a fake. The development
install is editable, so tests and benchmarks import it from the checkout.
"""
