"""The Label Studio labeling interfaces: 3XCM near-duplicate review, MixCuBe synthesis QA, and the native-speaker
review of a reference pack's translations.

Each review is described once (`ReviewSpec`): its XML, the control that carries the verdict, and the choices with
their machine names. The exporter, the offline JSON files and the vote aggregation all read the same spec, so a
choice renamed here cannot silently stop counting.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Literal

from data.review_labels import ACCEPT, FIX_MASK, REJECT_ARTIFACTS, REJECT_MARKER, RETRY_PROMPT

ReviewKind = Literal["duplicate_review", "synthesis_qa", "translation_review"]

# 3XCM paper App. J, verbatim apart from a stray page number.
DUPLICATE_GUIDELINE = (
    "Remove duplicates across multiple views. If an image depicts the same scene or object with no meaningful "
    "change, keep only one copy. Keep images if there is a significant variation. Allowed differences include time "
    "of day (e.g., day vs. night), viewpoint or angle (if the perspective changes enough that visual elements in "
    "the image are noticeably different). Minor or trivial variations are not allowed as they would be too similar. "
    "This includes slight shifts, crops, or zooms of the same scene."
)

# MixCuBe paper §2 and App. B.1: people check artifacts and that the cultural markers stay intact; a bad result is
# rejected, re-prompted with a tailored prompt, or its mask is fixed by hand.
SYNTHESIS_GUIDELINE = (
    "Check the synthesized image against the original. Accept it only if it is free of artifacts and every cultural "
    "marker (food, clothing, festival objects, setting) is unchanged: only the person's ethnicity may differ. "
    "Otherwise reject it for artifacts or for a changed cultural marker, ask for a retry with a tailored prompt "
    "(write the prompt), or fix the mask by painting the region to repaint on the original."
)


@dataclass(frozen=True)
class Choice:
    name: str  # stored in results and decision tables
    label: str  # what annotators see
    hint: str


@dataclass(frozen=True)
class ReviewSpec:
    kind: ReviewKind
    title: str
    verdict_control: str  # the <Choices> name
    verdict_target: str  # its toName
    choices: tuple[Choice, ...]
    image_fields: tuple[str, ...]  # task data fields holding image URLs
    label_config: str
    text_control: str | None = None  # the <TextArea> whose text a vote carries (a tailored prompt, a correction)

    def choice_names(self) -> list[str]:
        return [c.name for c in self.choices]

    def name_of_label(self, label: str) -> str | None:
        """The machine name of a choice as Label Studio stores it (the `alias`)."""
        return next((c.name for c in self.choices if label in (c.name, c.label)), None)


def _choices_xml(control: str, target: str, choices: tuple[Choice, ...]) -> str:
    items = "\n".join(
        f'    <Choice value="{escape(c.label)}" alias="{c.name}" hint="{escape(c.hint)}"/>' for c in choices
    )
    return (
        f'  <Choices name="{control}" toName="{target}" choice="single-radio" required="true" '
        f'showInline="false">\n{items}\n  </Choices>'
    )


def _interface(title: str, panels: str, verdict_target: str, choices: tuple[Choice, ...], extra: str = "") -> str:
    """The frame both reviews share: title, guideline, the image panels side by side, the scores, the verdict."""
    return f"""<View>
  <Header value="{title}"/>
  <View style="padding: 0 8px; color: #333"><Text name="guideline" value="$guideline"/></View>
  <View style="display: flex; gap: 8px">
{panels}
  </View>
  <View style="padding: 4px 8px; font-family: monospace"><Text name="scores" value="$scores"/></View>
{_choices_xml("verdict", verdict_target, choices)}
{extra}</View>
"""


SAME_SCENE = "same_scene"
DIFFERENT = "different"
UNSURE = "unsure"

DUPLICATE_CHOICES = (
    Choice(SAME_SCENE, "Same scene: drop one", "No meaningful change of viewpoint or time of day (App. J)."),
    Choice(DIFFERENT, "Different: keep both", "Time of day or viewpoint differs meaningfully."),
    Choice(UNSURE, "Unsure", "A vote for neither side: a side wins only with more than half of all votes."),
)

DUPLICATE_REVIEW_XML = _interface(
    "Near-duplicate review (3XCM App. J)",
    """    <View style="flex: 1"><Header value="A: $image_a_id" size="5"/>
      <Image name="image_a" value="$image_a"/></View>
    <View style="flex: 1"><Header value="B: $image_b_id" size="5"/>
      <Image name="image_b" value="$image_b"/></View>""",
    "image_a",
    DUPLICATE_CHOICES,
)

# The machine names are shared with the synthesis filters and resynthesis (data/review_labels.py).
SYNTHESIS_CHOICES = (
    Choice(ACCEPT, "Accept", "No artifacts, cultural markers intact."),
    Choice(REJECT_ARTIFACTS, "Reject: artifacts", "Visible artifacts; drop this attempt."),
    Choice(REJECT_MARKER, "Reject: cultural marker changed", "Food, clothing or setting no longer reads right."),
    Choice(RETRY_PROMPT, "Retry with a tailored prompt", "Write the prompt below (MixCuBe App. B.1)."),
    Choice(FIX_MASK, "Fix the mask", "Paint the region to repaint on the original."),
)
RETRY_PROMPT_CONTROL = "retry_prompt_text"
MASK_CONTROL = "mask_fix"

SYNTHESIS_QA_XML = _interface(
    "Synthesis QA (MixCuBe §2, App. A.6, B.1)",
    f"""    <View style="flex: 1"><Header value="Original (paint here to fix the mask)" size="5"/>
      <Image name="original" value="$original" zoom="true"/>
      <BrushLabels name="{MASK_CONTROL}" toName="original">
        <Label value="repaint" background="#ff0066"/>
      </BrushLabels>
    </View>
    <View style="flex: 1"><Header value="Synthesized: $ethnicity, attempt $attempt" size="5"/>
      <Image name="synthesized" value="$synthesized"/></View>
    <View style="flex: 1"><Header value="Mask used" size="5"/><Image name="mask" value="$mask"/></View>""",
    "synthesized",
    SYNTHESIS_CHOICES,
    extra=f"""  <View visibleWhen="choice-selected" whenTagName="verdict"
        whenChoiceValue="Retry with a tailored prompt">
    <Header value="Tailored prompt" size="5"/>
    <TextArea name="{RETRY_PROMPT_CONTROL}" toName="synthesized" rows="3" maxSubmissions="1" editable="true"/>
  </View>
""",
)

SPECS: dict[ReviewKind, ReviewSpec] = {
    "duplicate_review": ReviewSpec(
        kind="duplicate_review",
        title="3XCM near-duplicate review",
        verdict_control="verdict",
        verdict_target="image_a",
        choices=DUPLICATE_CHOICES,
        image_fields=("image_a", "image_b"),
        label_config=DUPLICATE_REVIEW_XML,
    ),
    "synthesis_qa": ReviewSpec(
        kind="synthesis_qa",
        title="MixCuBe synthesis QA",
        verdict_control="verdict",
        verdict_target="synthesized",
        choices=SYNTHESIS_CHOICES,
        image_fields=("original", "synthesized", "mask"),
        label_config=SYNTHESIS_QA_XML,
        text_control=RETRY_PROMPT_CONTROL,
    ),
}

# 3XCM paper §3.2.1 and App. R: the translations were drafted by a model and reviewed by native speakers.
TRANSLATION_GUIDELINE = (
    "You are a native speaker of this language. Check the draft against the English source: it should be the short "
    "everyday phrase a native speaker would type into an image search, culture agnostic (no added descriptors), and, "
    "for an RQ3 template or a country's form, read naturally in the example query. Accept it as it is, correct it "
    "(write the corrected text), or reject it when it is wrong and you cannot correct it."
)

TRANSLATION_ACCEPT = "accept"
TRANSLATION_CORRECT = "correct"
TRANSLATION_REJECT = "reject"
CORRECTION_CONTROL = "correction"
TRANSLATION_CHOICES = (
    Choice(TRANSLATION_ACCEPT, "Accept the draft", "It is right as it is."),
    Choice(TRANSLATION_CORRECT, "Correct it", "Write the corrected text below."),
    Choice(TRANSLATION_REJECT, "Reject it", "Wrong, and you cannot correct it; it goes back to be drafted again."),
)

TRANSLATION_REVIEW_XML = f"""<View>
  <Header value="Translation review: $language_name"/>
  <View style="padding: 0 8px; color: #333"><Text name="guideline" value="$guideline"/></View>
  <View style="padding: 4px 8px"><Header value="English source" size="5"/><Text name="source" value="$source"/></View>
  <View style="padding: 4px 8px"><Header value="What it is" size="5"/><Text name="context" value="$context"/></View>
  <View style="padding: 4px 8px"><Header value="Draft" size="5"/><Text name="draft" value="$draft"/></View>
  <View style="padding: 4px 8px"><Header value="Example query" size="5"/><Text name="example" value="$example"/></View>
{_choices_xml("verdict", "draft", TRANSLATION_CHOICES)}
  <View visibleWhen="choice-selected" whenTagName="verdict" whenChoiceValue="Correct it">
    <Header value="Corrected text" size="5"/>
    <TextArea name="{CORRECTION_CONTROL}" toName="draft" rows="2" maxSubmissions="1" editable="true"/>
  </View>
</View>
"""
SPECS["translation_review"] = ReviewSpec(
    kind="translation_review",
    title="Translation review",
    verdict_control="verdict",
    verdict_target="draft",
    choices=TRANSLATION_CHOICES,
    image_fields=(),
    label_config=TRANSLATION_REVIEW_XML,
    text_control=CORRECTION_CONTROL,
)

GUIDELINES: dict[ReviewKind, str] = {
    "duplicate_review": DUPLICATE_GUIDELINE,
    "synthesis_qa": SYNTHESIS_GUIDELINE,
    "translation_review": TRANSLATION_GUIDELINE,
}


def check_label_config(spec: ReviewSpec) -> None:
    """Parse the XML with the SDK's own interface model and check the controls the importer relies on."""
    from label_studio_sdk.label_interface import LabelInterface

    interface = LabelInterface(spec.label_config)
    controls = {c.name for c in interface.controls}
    objects = {o.name for o in interface.objects}
    missing = [spec.verdict_control] if spec.verdict_control not in controls else []
    missing += [f for f in spec.image_fields if f not in objects]
    if missing:
        raise ValueError(f"{spec.kind}: label config lacks {missing}")
