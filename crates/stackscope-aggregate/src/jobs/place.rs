//! Where a stack is, as the job's owner reads it: the one rule the roles, the step, the memory
//! verdict and `watch`'s memory climb all place a sample by.

use stackscope_event::FileOrigin;

/// The frame a stack is at: its innermost frame of the job's own code, else its innermost frame
/// of code (not native). `innermost_first` lists the stack's frames innermost first; `origin`
/// says where a frame comes from, `None` for one not to place a sample at (a frame whose
/// function is unknown).
pub fn place_in<T: Copy>(
    innermost_first: impl Iterator<Item = T> + Clone,
    origin: impl Fn(T) -> Option<FileOrigin>,
) -> Option<T> {
    innermost_first
        .clone()
        .find(|&f| origin(f) == Some(FileOrigin::Job))
        .or_else(|| {
            let mut frames = innermost_first;
            frames.find(|&f| origin(f).is_some_and(|o| o != FileOrigin::Native))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_job_frame_else_the_innermost_code_frame() {
        use FileOrigin::*;
        let stack = [Native, Stdlib, Job, Package, Job];
        let at = place_in(stack.iter().enumerate(), |(_, &o)| Some(o)).map(|(i, _)| i);
        assert_eq!(at, Some(2));
        let no_job = [Native, Package, Stdlib];
        let at = place_in(no_job.iter().enumerate(), |(_, &o)| Some(o)).map(|(i, _)| i);
        assert_eq!(at, Some(1));
        let unknown = [Native, Job];
        let at = place_in(unknown.iter().enumerate(), |(i, &o)| (i != 1).then_some(o));
        assert_eq!(at, None);
    }
}
