//! Tests' helper: a text cut into pieces, to check that a reader fed pieces reads what it reads
//! when fed the whole.

/// `text` cut at `cuts` (each taken modulo `text.len() + 1`, in any order); the pieces, some
/// possibly empty, hold every byte once, in order.
pub(crate) fn cut(text: &[u8], cuts: impl IntoIterator<Item = usize>) -> Vec<&[u8]> {
    let mut at: Vec<usize> = cuts.into_iter().map(|c| c % (text.len() + 1)).collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut from = 0;
    for cut in at.into_iter().chain([text.len()]) {
        pieces.push(&text[from..cut]);
        from = cut;
    }
    pieces
}
