"""Templates: found as package data, all used, strict about undefined names."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from render_fixtures import rdma_cluster, tcp_cluster

import mlenv
from mlenv.config.model import DevTools, Security
from mlenv.render import templating
from mlenv.render.plan import render_cluster

REPO = Path(__file__).resolve().parents[3]


def test_templates_are_package_data_and_the_root_folder_points_there():
    d = templating.template_dir()
    assert d.is_relative_to(Path(mlenv.__file__).parent)
    assert (REPO / "templates").resolve() == d.resolve()


def test_every_template_is_used(monkeypatch):
    used: set[str] = set()
    real = templating.render_template

    def spy(template, kind, /, **values):
        used.add(template)
        return real(template, kind, **values)

    monkeypatch.setattr("mlenv.render.plan.render_template", spy)
    for c, mode in [
        (rdma_cluster(dev_tools=DevTools(vscode=True, jupyter=True, tensorboard=True)), "rdma"),
        (rdma_cluster(security=Security(requires_privileged_scc=True)), "rdma"),
        (tcp_cluster(), "tcp"),
    ]:
        render_cluster(c, mode, validate=False)  # type: ignore[arg-type]
    on_disk = {p.name for p in templating.template_dir().glob("*.yaml.j2")}
    assert on_disk and used == on_disk


def test_undefined_template_variable_is_an_error():
    with pytest.raises(jinja2.UndefinedError, match="labels"):
        templating.render_template("imagestream.yaml.j2", "ImageStream", name="x", namespace="y")


def test_wrong_kind_is_caught():
    with pytest.raises(ValueError, match="expected 'Route'"):
        templating.render_template(
            "imagestream.yaml.j2", "Route", name="x", namespace="y", labels={}
        )
