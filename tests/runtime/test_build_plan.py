"""The Dockerfile planner: every image the file names reaches the resolver, words
expand as Docker's lexer expands them, and what cannot be built safely is refused."""

from __future__ import annotations

import pytest

from gpudock.runtime.build.plan import BaseImage, DockerfileError, external_images, plan
from gpudock.runtime.build.words import WordError, word, words

BASE_CONFIG = {"Env": ["PATH=/usr/bin:/bin", "HOME=/root"], "Cmd": ["bash"], "WorkingDir": "/"}


class Resolver:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, text: str, line: int) -> BaseImage:
        self.asked.append(text)
        return BaseImage(image_id=f"sha256:{len(self.asked):064d}", config=BASE_CONFIG)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a b" c', ["a b", "c"]),
        ("'$A' \"$A\"", ["$A", "1 2"]),
        ("$A", ["1", "2"]),
        ("${A:-x} ${E:-dflt} ${Z-zz} ${E-set}", ["1", "2", "dflt", "zz"]),
        ("${A:+alt} ${Z:+alt}", ["alt"]),
        ("x\\ y \\$A", ["x y", "$A"]),
    ],
)
def test_words_expand_like_dockers_lexer(text: str, expected: list[str]) -> None:
    assert words(text, {"A": "1 2", "E": ""}) == expected


def test_strict_words_refuse_variables_without_a_value() -> None:
    assert word("${B}", {"B": "x/y:1"}, strict=True) == "x/y:1"
    with pytest.raises(WordError, match=r"\$NOPE has no value"):
        word("$NOPE", {}, strict=True)
    with pytest.raises(WordError, match="NOPE: gone"):
        word("${NOPE:?gone}", {})


def test_every_external_image_goes_through_the_resolver() -> None:
    resolver = Resolver()
    built = plan(
        "ARG BASE=img/one:1\n"
        "FROM $BASE AS first\n"
        "FROM first AS second\n"
        "FROM img/two:2\n"
        "COPY --from=first /a /a\n"
        "COPY --from=1 /b /b\n"
        "COPY --from=img/three:3 /c /c\n",
        resolver,
    )
    assert resolver.asked == ["img/one:1", "img/two:2", "img/three:3"]
    assert [s.base_stage for s in built.stages] == [None, 0, None]
    copies = [s.copy for s in built.stages[2].steps if s.copy]
    assert [(c.from_stage, c.from_image) for c in copies if c] == [
        (0, None),
        (1, None),
        (None, f"sha256:{3:064d}"),
    ]
    assert external_images(built) == {f"sha256:{n:064d}" for n in (1, 2, 3)}


@pytest.mark.parametrize(
    ("dockerfile", "why"),
    [
        ("RUN true\n", "the first instruction must be FROM"),
        ("", "no instructions"),
        ("ARG A=1\n", "no FROM line"),
        ("FROM x\nADD https://example.com/f /f\n", "remote ADD is refused"),
        ("FROM x\nADD git@github.com:a/b.git /b\n", "remote ADD is refused"),
        ("FROM x\nRUN --mount=type=bind,from=y,target=/y cat /y\n", "RUN --mount is not supported"),
        ("FROM x\nRUN --network=host true\n", "builds have no network"),
        ("FROM x\nVOLUME /data\n", "VOLUME is not supported"),
        ("FROM scratch\n", "FROM scratch is not supported"),
        ("FROM --platform=linux/arm64 x\n", "--platform is not supported"),
        ("ARG B\nFROM $B\n", "cannot be resolved"),
        ("FROM x\nCOPY --from=$NOPE /a /a\n", "has no value"),
        ("FROM x\nCOPY --from=5 /a /a\n", "no earlier stage"),
        ("FROM x\nCOPY only-one\n", "one or more sources and a destination"),
        ("FROM x\nFROBNICATE\n", "unknown instruction"),
        ("FROM x\nCOPY --chmod=9z a /a\n", "expected octal"),
    ],
)
def test_what_cannot_be_built_safely_is_refused(dockerfile: str, why: str) -> None:
    with pytest.raises(DockerfileError, match=why):
        plan(dockerfile, Resolver())


def test_configuration_follows_docker_semantics() -> None:
    built = plan(
        "FROM x\n"
        "ARG TOKEN=t\n"
        'ENV A=1 B="two words"\n'
        "ENV C=$A-$HOME\n"
        "WORKDIR app\n"
        "WORKDIR sub\n"
        "COPY f ./\n"
        "USER nobody\n"
        "RUN echo $TOKEN\n"
        'ENTRYPOINT ["python"]\n'
        "EXPOSE 8888 6006/udp\n",
        Resolver(),
    )
    steps = built.stages[0].steps
    final = steps[-1].config
    env = dict(item.split("=", 1) for item in final["Env"])
    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "A": "1",
        "B": "two words",
        "C": "1-/root",
    }
    assert final["WorkingDir"] == "/app/sub"
    assert final["Entrypoint"] == ["python"] and final["Cmd"] is None
    assert set(final["ExposedPorts"]) == {"8888/tcp", "6006/udp"}
    copy = next(s.copy for s in steps if s.copy)
    assert copy is not None and copy.dest == "/app/sub/"
    run = next(s.run for s in steps if s.run)
    assert run is not None
    assert run.argv == ("/bin/sh", "-c", "echo $TOKEN") and run.user == "nobody"
    assert "TOKEN=t" in run.env and not any(e.startswith("TOKEN=") for e in final["Env"])
    assert built.total_steps == 11 and steps[0].text == "FROM x"
