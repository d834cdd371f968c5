"""Issue 17: the README's snippets do what they say; docs/support.md links real tests; errors
the docs quote are the ones the code raises."""

import re

from conftest import run_python

from _helpers import ROOT
README = (ROOT / "README.md").read_text()


def section(text, title):
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def code_blocks(text, language):
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_quick_start_is_the_two_commands():
    (block,) = code_blocks(section(README, "Quick start"), "bash")
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ["bash scripts/run_demo.sh", "bash scripts/run_tests.sh"]


def test_usage_snippet_prints_what_it_says():
    snippet = code_blocks(section(README, "Usage"), "python")[0]
    expected = re.findall(r"# prints: (.*)$", snippet, re.M)
    assert len(expected) == 4
    proc = run_python(snippet)
    assert proc.stdout.splitlines() == expected
    assert proc.stderr == ""


def test_support_table_rows_have_a_status_and_existing_tests():
    text = (ROOT / "docs" / "support.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    header, rows = rows[0], rows[1:]
    assert header == "| feature | status | notes | test |"
    assert len(rows) >= 20
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 4, row
        assert cells[1] in ("supported", "partial", "not yet"), row
        links = re.findall(r"\]\(\.\./(test/\w+/test_\w+\.py)\)", cells[3])
        assert links, row
        for link in links:
            assert (ROOT / link).is_file(), link
    for feature in ("autocast", "checkpoints", "`torch.compile`", "profiler", "DDP", "FSDP2",
                    "streams", "events", "convolution", "autograd"):
        assert any(feature in row for row in rows), feature


def test_readme_links_the_support_table():
    assert "- [docs/support.md](docs/support.md):" in section(README, "Documentation")


def test_development_layers_name_every_csrc_file():
    text = (ROOT / "docs" / "development.md").read_text()
    (layers,) = code_blocks(section(text, "Layers"), "")
    missing = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "csrc").rglob("*"))
               if path.is_file() and not re.search(rf"\b{re.escape(path.name.split('.')[0])}\b", layers)]
    assert missing == []


def test_the_rank_past_the_visible_devices_error_is_quoted_as_raised():
    proc = run_python("import torch; torch.ones(1, device='spyre')", check=False,
                      env={"SPYRE_DEVICES": "0", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    raised = proc.stderr.strip().splitlines()[-1]
    assert raised == ("RuntimeError: Invalid device index 1: out of range for 1 visible Spyre "
                      "device(s) (expected an index in [0, 1))")
    distributed = (ROOT / "docs" / "distributed.md").read_text()
    (quoted,) = re.findall(r"fails with:\n\n  ```\n  (.*)\n  ```", distributed)
    assert quoted == raised
    for name in ("distributed.md", "streams.md"):
        assert "logical_device_id" not in (ROOT / "docs" / name).read_text(), name


def test_every_test_path_the_docs_name_exists():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {(doc.name, path) for doc in docs
             for path in re.findall(r"\btest/[\w/]*\w+\.(?:py|sh|cpp)\b", doc.read_text())}
    assert len(named) > 50
    assert sorted(pair for pair in named if not (ROOT / pair[1]).is_file()) == []


def test_the_layout_table_lists_every_test_folder_and_names_are_unique():
    text = (ROOT / "docs" / "development.md").read_text()
    listed = re.findall(r"^\| `(\w+)/` \|", section(text, "Tests"), re.M)
    folders = sorted(p.name for p in (ROOT / "test").iterdir()
                     if p.is_dir() and any(p.glob("test_*.py")))
    assert sorted(listed) == folders
    assert list((ROOT / "test").glob("test_*.py")) == []  # every test file is in a folder
    names = [p.name for p in (ROOT / "test").glob("*/test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []  # pytest imports them by name
